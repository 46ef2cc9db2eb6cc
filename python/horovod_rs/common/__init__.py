"""What every framework binding shares: the rank's engine and its place in the job."""
