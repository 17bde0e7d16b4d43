package goredsync

import (
	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/scripts"
)

// script is what one of redsync's scripts does.
type script uint8

const (
	scriptUnknown script = iota
	scriptDelete
	scriptTouch
	scriptTouchWithSetNX
)

// String returns redsync's name for the script.
func (s script) String() string {
	switch s {
	case scriptDelete:
		return "delete"
	case scriptTouch:
		return "touch"
	case scriptTouchWithSetNX:
		return "touchWithSetNX"
	}
	return "unknown"
}

// pin ties one script SHA1 to what the script does and the releases that
// send it.
type pin = adapterkit.Pin[script]

// pins are the scripts of every supported redsync release: package scripts
// pins their SHA1s and says which releases send them
// (scripts.PinsOf(scripts.Redsync)). They come in the table's order, which
// it keeps: the fuzz seed corpus names pins by index.
var pins = adapterkit.PinsOf(scripts.Redsync, func(p scripts.Pin) (script, bool) {
	for _, s := range []script{scriptDelete, scriptTouch, scriptTouchWithSetNX} {
		if s.String() == p.Script {
			return s, true
		}
	}
	return scriptUnknown, false
})

// Releases returns the first and the last redsync release the adapter
// knows, the oldest and the newest of scripts.Releases(scripts.Redsync);
// every release between them sends the same scripts (see package scripts).
// Both are exercised by lockwatch's tests: the first is the one lockwatch's
// go.mod requires, the last the one CI also tests with. Releases is safe
// for concurrent use.
func Releases() []string {
	r := scripts.Releases(scripts.Redsync)
	return []string{r[0], r[len(r)-1]}
}
