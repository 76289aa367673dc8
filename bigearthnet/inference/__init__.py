"""Using a trained model outside training: loading a run folder into a model ready to predict."""
