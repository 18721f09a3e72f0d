"""Checkpoints of other libraries in and out of our own modules: Hugging Face families
(:mod:`.families`, :mod:`.hf`) and PEFT adapters (:mod:`.peft`)."""
