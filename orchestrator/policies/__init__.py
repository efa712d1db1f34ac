"""What a KV policy is made of, the policies registered, and the engine a cell runs one with."""
