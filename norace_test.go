//go:build !race

package lockwatch_test

// raceEnabled is true under go test -race.
const raceEnabled = false
