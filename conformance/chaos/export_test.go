package chaos

// AllowInProcess lets the planted-bug test run a campaign over mem://.
func AllowInProcess() { allowInProcess = true }
