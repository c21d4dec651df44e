"""The transformers backend: `backend` registers it and decodes with the core's engine; `loader` loads a
pair (hub ids, folders, GGUF files, per-model dtypes) and checks its tokenizers and vocabularies."""
