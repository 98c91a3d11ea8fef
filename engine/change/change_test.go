package change

import "testing"

func TestLSNRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		l, err := ParseLSN(s)
		if err != nil {
			t.Fatalf("ParseLSN(%q): %v", s, err)
		}
		if got := l.String(); got != s {
			t.Fatalf("ParseLSN(%q).String() = %q", s, got)
		}
	}
	if _, err := ParseLSN("nope"); err == nil {
		t.Fatal("ParseLSN(nope) succeeded")
	}
}

func TestQuoted(t *testing.T) {
	t.Parallel()
	got := TableName{Schema: "Mixed Schema", Name: `Weird"Table`}.Quoted()
	if want := `"Mixed Schema"."Weird""Table"`; got != want {
		t.Fatalf("Quoted() = %s, want %s", got, want)
	}
}
