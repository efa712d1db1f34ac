"""What a sweep runs, decided before anything starts: the spec and its options, its cells, each cell's
engine configuration, the preflight sizing and how many GPUs to ask for (pure: no process, Ray, HTTP or
tracking code)."""
