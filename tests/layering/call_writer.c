/* A call from plan up into sync does not link against plan's closure. */
void ferry_writer_destroy(void *w);
void probe(void);
void probe(void) { ferry_writer_destroy(0); }
