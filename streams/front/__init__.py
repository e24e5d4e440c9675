"""The canonicalizer front: the per-URL path (urls.raw -> urls.canonical), its child process, its
metrics and what it forwards for learning."""
