"""``contract_verl.py`` runs only in a child interpreter that imports verl (test_verl_contract.py)."""

import os

collect_ignore = [] if os.environ.get("RLPROF_VERL_CONTRACT") else ["contract_verl.py"]
