"""verl: the trainer's rollout server actors (``facts.py`` holds verl's facts)."""
