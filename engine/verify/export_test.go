package verify

// PortableHash returns cfg set to hash rows with md5 only: the path Compare
// takes when the two databases compute hashtextextended differently.
func PortableHash(cfg Config) Config {
	cfg.portableHash = true
	return cfg
}
