"""The simulation core: domains, jobs and time, with no Ray in it."""
