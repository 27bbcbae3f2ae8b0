"""Testing helpers: scripted citing models, replay of real recordings, failure-path scenarios."""
