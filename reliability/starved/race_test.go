//go:build race

package starved_test

// raceEnabled: the test binary was built with -race, as CI builds it.
const raceEnabled = true
