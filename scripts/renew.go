package scripts

import _ "embed"

//go:embed renew.lua
var renewSource string

// RenewSHA1 is the SHA1 of lockwatch's renew script, lower-case hex, as
// SCRIPT LOAD of [RenewSource] reports it and as the watchdog sends it with
// EVALSHA.
const RenewSHA1 = "ea170dc573a4cfd37914800f86224c00be729256"

// RenewSource returns the Lua source of lockwatch's renew script, the one
// whose SHA1 is [RenewSHA1]. It is safe for concurrent use.
func RenewSource() string { return renewSource }
