package watchdog

import (
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/internal/table"
)

// Every hash slot has a two-byte key without braces that hashes to it, so
// that the router asks go-redis for a slot's node by it.
func TestSlotKeysCoverEverySlot(t *testing.T) {
	for s := range uint16(table.SlotCount) {
		k := slotKey(s)
		if len(k) != 2 || strings.ContainsAny(k, "{}") {
			t.Fatalf("slot %d: key %q, want two bytes without braces", s, k)
		}
		if got := table.SlotOf(k); got != s {
			t.Fatalf("slot %d: key %q hashes to slot %d", s, k, got)
		}
	}
}
