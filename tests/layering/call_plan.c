/* A call into plan itself links against plan's layering closure. */
void ferry_plan_destroy(void *plan);
void probe(void);
void probe(void) { ferry_plan_destroy(0); }
