"""`adaptivespec train-draft`: an EAGLE-3 head for a served target, trained here from local text."""
