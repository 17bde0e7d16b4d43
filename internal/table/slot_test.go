package table

import "testing"

func TestSlotOf(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for _, tc := range []struct {
		key  string
		want uint16
	}{
		{"123456789", 0x31C3 % SlotCount},
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", SlotOf("user1000")},
		{"{user1000}.followers", SlotOf("user1000")},
		{"foo{}{bar}", SlotOf("foo{}{bar}")}, // empty tag: the whole key
		{"foo{{bar}}zap", SlotOf("{bar")},
		{"", 0},
	} {
		if got := SlotOf(tc.key); got != tc.want {
			t.Errorf("SlotOf(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
	if SlotOf("foo{}{bar}") == SlotOf("bar") {
		t.Error("SlotOf(foo{}{bar}) hashed the second tag; an empty first tag means the whole key")
	}
}
