package audit

import "testing"

func TestDiscard(t *testing.T) {
	Discard.Record(Event{Action: "auth.success"}) // must not panic or block
}
