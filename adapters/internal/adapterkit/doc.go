// Package adapterkit is what the lock adapters under adapters/ share, so that
// each adapter package holds only what is specific to its upstream library:
// its pinned scripts, its classification rules and the calls its probe makes.
//
// It offers:
//
//   - argument readers ([Text], [Integer], [Millis]) that read command
//     arguments the way go-redis writes them and Redis parses them, without
//     allocating for string arguments.
//   - the pin table ([Pin], [Pins]): which of an adapter's scripts an EVALSHA
//     or EVAL runs, by the lower-case hex SHA1 of the script ([ScriptSHA1]),
//     without allocating for EVALSHA with a string SHA1.
//   - readers of a one-key lock script's command ([Pins.Call]) and the
//     classification of the scripts whose replies mean the same in every
//     library ([Refresh] for a PEXPIRE when the value matches, [Release]
//     for a DEL when the value matches).
//   - [Version]: the linked version of the upstream library, as probe errors
//     name it.
//   - the probe's recording fake Redis ([Recorder]): a go-redis client whose
//     dialer always fails and whose hook never calls the next hook, answers
//     each command as the adapter says, records the SET, EVAL and EVALSHA
//     commands the upstream library sends with what the adapter made of them,
//     and runs the adapter's probe [Step]s, returning an
//     *[registry.UpstreamChangedError] for scripts that are not pinned.
package adapterkit
