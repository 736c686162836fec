"""Where nodes come from: the `Provisioner` protocol the coordinator calls (`base`), cache
nodes as local processes (`local`) or EC2 instances (`ec2`), and the speculative threshold
T(n) that tells the scaler when to launch (`threshold`).

Import the submodules (``elastic_cache.provisioner.local``); nothing is imported here, so
the coordinator's pure parts need neither boto3 nor the process launcher.
"""
