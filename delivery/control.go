package delivery

// IsControlMethod reports whether method is a control message, which never
// counts against a window and never waits for credit (seed 000 "Control
// Messages"): channel/credit, unsubscribe, and the channel-defined tcp/reset.
// Every other notification, including one whose method is unknown, is a
// data message, so both peers count the same bytes.
func IsControlMethod(method string) bool {
	switch method {
	case "channel/credit", "unsubscribe", "tcp/reset":
		return true
	}
	return false
}
