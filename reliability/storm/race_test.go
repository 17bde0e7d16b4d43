//go:build race

package storm_test

// raceEnabled is true under go test -race: the storm skips (see doc.go).
const raceEnabled = true
