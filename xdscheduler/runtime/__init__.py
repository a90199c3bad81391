"""Ray plumbing around the simulation core: domain actors, the controller, the study driver."""
