"""The engine's clients: the interactive session (+ its parts), branching, many streams, the benchmark."""
