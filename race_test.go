//go:build race

package lockwatch_test

// raceEnabled is true under go test -race. The hour-long hold runs a tenth
// of its hour under it (see TestI2_RedislockHundredMillisecondsForAnHour).
const raceEnabled = true
