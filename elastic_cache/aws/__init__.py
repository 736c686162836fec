"""Elastic cache on AWS: everything that calls AWS on the command line's or the
coordinator's behalf.

- `deploy`: ``ecache deploy``, ``destroy`` and the AWS side of ``status --name``.
- `ec2`: cache nodes as EC2 instances (the coordinator's EC2 provisioner), Spot included.
- `userdata`: the boot scripts of node and coordinator instances (package data).
- `errors`: AWS errors as the package's typed errors (`aws_call`).

Nothing is imported here: import the submodules. boto3 is passed in as a session, never
taken from a global. The S3 cold tier (`elastic_cache.tiers.s3`) and the coordinator's
S3 state (`elastic_cache.coordinator.s3state`) stay with their layers.
"""
