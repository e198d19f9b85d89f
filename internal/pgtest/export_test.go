package pgtest

// DataDir is the cluster's data directory, for the tests.
func (c *Cluster) DataDir() string { return c.dataDir() }
