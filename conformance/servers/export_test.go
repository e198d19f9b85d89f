package servers

// PgSelectWithin is pgSelectWithin, for the external tests.
var PgSelectWithin = pgSelectWithin

// SkipDockerInShort is skipDockerInShort, for the external tests.
var SkipDockerInShort = skipDockerInShort
