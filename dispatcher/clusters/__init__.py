"""Worker clusters: the registry built from kubeconfig Secrets, and live mirrors of each cluster."""
