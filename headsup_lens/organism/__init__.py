"""The built-in model organism with planted functional pathways."""
