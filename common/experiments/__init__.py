"""The chapters' device experiments (device_experiments, on each framework's ops)
and the Keras chapter's device-scopes example (scopes)."""
