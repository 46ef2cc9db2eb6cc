"""What the estimators of every framework share: params, store, backend, data path, persistence."""
