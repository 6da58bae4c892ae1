"""The sandbox: emulated Kubernetes API servers (``fakeapi``) and, later, an emulation of Kueue.

Nothing in the production layers imports this package; only the command line does, to offer the
``sandbox`` commands. Its extra libraries come with the ``sandbox`` extra of the distribution.
"""
