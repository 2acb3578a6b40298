// The main of a test program whose code is in the torch_test_programs
// library (tests/meson.build): the program compiles with WORKER_ENTRY set to
// its entry point, e.g. dist_worker_main.
int WORKER_ENTRY(int argc, char** argv);

int main(int argc, char** argv) { return WORKER_ENTRY(argc, argv); }
