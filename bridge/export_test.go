package bridge

// Test-only exports, for the tests of package bridge_test.

// EventID and ParseEventID are the SSE event ID format, for tests that
// check or make the IDs a client sees.
var (
	EventID      = eventID
	ParseEventID = parseEventID
)
