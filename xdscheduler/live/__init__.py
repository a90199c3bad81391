"""The live control plane: domains are labelled Ray nodes, jobs are Ray Train runs."""
