"""Where nodes come from: the `Provisioner` protocol the coordinator calls (`base`), cache
nodes as local processes (`local`, `supervised`, with `health` checks), and the
speculative threshold T(n) that tells the scaler when to launch (`threshold`). Nodes as
EC2 instances are `elastic_cache.aws.ec2`'s.

Import the submodules (``elastic_cache.provisioner.local``); nothing is imported here, so
the coordinator's pure parts need neither boto3 nor the process launcher.
"""
