"""`kata bench`: decode-step speed and memory of KV caches, beside the machine's floors and real peers."""
