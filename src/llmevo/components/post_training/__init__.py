"""Post-training methods, one paper per module (slot ``post_training``)."""
