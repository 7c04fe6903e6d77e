//go:build shmarena_broken_ack

package shmarena

// This file breaks a guarantee on purpose. It is built only with the tag
// shmarena_broken_ack, by lincheck's TestBrokenAckIsCaught, to prove that
// the linearizability checker catches a broken acking group: Ack then
// finishes any pending record, whoever holds its lease and however many
// times it was delivered since, so a member whose lease ran out and went
// to another member still "acks" the record the other is working on.
// Never ship a build with this tag.

func init() { brokenAck = true }
