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
//     without allocating for EVALSHA with a string SHA1; [PinsOf] builds an
//     adapter's pins from the one table of pinned scripts, package scripts.
//   - the reader of a lock script's command, over one key or several
//     ([Pins.Call], [Call]), the two ways lock scripts answer ([Replies]:
//     1 or 0, or OK or nil) and the classification of the scripts that mean
//     the same in every library ([Refresh] for a PEXPIRE when the value
//     matches, [Release] for a DEL when the value matches), pending
//     commands ([registry.Command] Pending) included; [SameAction], since
//     a [registry.Action] is not comparable.
//   - [Version]: the linked version of the upstream library, as probe errors
//     name it.
//   - the probe's recording fake Redis ([Recorder]): a go-redis client whose
//     dialer always fails and whose hook never calls the next hook, answers
//     each command as the adapter says, records the SET, EVAL and EVALSHA
//     commands the upstream library sends with what the adapter made of them
//     (before sending them, as pending, and with the fake's answer),
//     and runs the adapter's probe [Step]s, returning an
//     *[registry.UpstreamChangedError] for scripts that are not pinned.
package adapterkit
