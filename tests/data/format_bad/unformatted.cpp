// Deliberately not clang-formatted: scripts/check_format.py must name this file.
int  main( ) {return 0;}
