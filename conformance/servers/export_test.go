package servers

// PgSelectWithin is pgSelectWithin, for the external tests.
var PgSelectWithin = pgSelectWithin
