// Keeps a test-helper library valid when a layer has no *_testlib.cc files.
