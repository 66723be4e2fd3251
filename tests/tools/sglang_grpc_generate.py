"""Generate through SGLang's gRPC mode, as an SMG router does: ``python sglang_grpc_generate.py PORT N``.

Runs in ``.venv-sglang`` (``smg-grpc-proto``, an SGLang dependency, holds the
generated stubs). Each request sends 5 prompt tokens and asks for exactly 4
new ones: 1 prefill and 3 decode iterations on an idle server.
"""

import sys

import grpc
from smg_grpc_proto.generated import sglang_scheduler_pb2 as pb
from smg_grpc_proto.generated import sglang_scheduler_pb2_grpc as rpc

if __name__ == "__main__":
    port, count = int(sys.argv[1]), int(sys.argv[2])
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=60)
    stub = rpc.SglangSchedulerStub(channel)
    for k in range(count):
        request = pb.GenerateRequest(request_id=f"rlprof-test-{k}", tokenized=pb.TokenizedInput(input_ids=[5, 6, 7, 8, 9]),
                                     sampling_params=pb.SamplingParams(max_new_tokens=4, ignore_eos=True, temperature=0))
        responses = list(stub.Generate(request, timeout=60))
        assert responses, "no response"
    print("generated", count)
