package main

import (
	"io"
	"strings"

	"github.com/mattn/go-runewidth"
)

// table writes aligned columns as text/tabwriter does (two spaces between
// columns, the last one unpadded), but measures cells in terminal columns
// (go-runewidth): a title in CJK or with emoji, two columns a character,
// or with combining marks, none, keeps the columns after it aligned.
type table struct {
	rows [][]string
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

// write prints the rows to w.
func (t *table) write(w io.Writer) error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], runewidth.StringWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-runewidth.StringWidth(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}
