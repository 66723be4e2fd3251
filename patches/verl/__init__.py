"""verl: the trainer's rollout server actors (``trainer.py`` holds verl's facts)."""
