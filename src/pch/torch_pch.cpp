// Anchor translation unit for the precompiled torch header.
