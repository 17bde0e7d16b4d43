// Package faults holds reliability scenarios of lockwatch under network
// faults and Redis restarts. It has no code of its own: everything is in its
// tests, which run against a real redis-server started by
// internal/testredis (they skip without one unless LOCKWATCH_REQUIRE_REDIS=1).
package faults
