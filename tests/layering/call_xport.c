/* codec may not call a transport. */
void ferry_xport_destroy(void *xp);
void probe(void);
void probe(void) { ferry_xport_destroy(0); }
