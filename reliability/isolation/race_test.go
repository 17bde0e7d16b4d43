//go:build race

package isolation_test

// raceEnabled is true under go test -race (see refreshRace).
const raceEnabled = true
