"""Online endpoints over Ray Serve: the policy (POST /policy/act) and the forecaster."""
