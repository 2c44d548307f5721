"""The target seam and its backends: torch (any Hugging Face id or path) and llama.cpp (a GGUF), model
loading and the embedded models."""
