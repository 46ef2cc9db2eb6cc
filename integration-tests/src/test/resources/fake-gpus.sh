#!/usr/bin/env bash
# Spark GPU discovery script for tests: every worker reports two GPUs, "0" and "1".
echo '{"name": "gpu", "addresses": ["0", "1"]}'
