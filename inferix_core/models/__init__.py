"""Model families (transformers) the engine can run."""
