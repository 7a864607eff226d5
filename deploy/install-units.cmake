# install-units.cmake — runs at `cmake --install` time (see the end of CMakeLists.txt).
#
# Installs deploy/attnd.service, deploy/attnd@.service and deploy/attnd-models.service with their absolute paths
# (/usr/local/bin/attnd, /usr/local/share/doc/attnd) rewritten for the prefix in effect now,
# which --prefix may have changed since configuration. The unit must name the final path of the
# binary, so DESTDIR is only where the file is written, never part of what it says.
# Inputs (set by install(CODE) before this script): ATTND_DEPLOY_DIR, ATTND_UNITDIR,
# ATTND_BINDIR, ATTND_DOCDIR (relative to the prefix, or absolute).
foreach(var ATTND_UNITDIR ATTND_BINDIR ATTND_DOCDIR)
  if(IS_ABSOLUTE "${${var}}")
    set(${var}_FULL "${${var}}")
  else()
    set(${var}_FULL "${CMAKE_INSTALL_PREFIX}/${${var}}")
  endif()
endforeach()

foreach(unit attnd.service attnd@.service attnd-models.service)
  file(READ "${ATTND_DEPLOY_DIR}/${unit}" text)
  string(REPLACE "/usr/local/bin/attnd" "${ATTND_BINDIR_FULL}/attnd" text "${text}")
  string(REPLACE "/usr/local/share/doc/attnd" "${ATTND_DOCDIR_FULL}" text "${text}")
  set(dest "$ENV{DESTDIR}${ATTND_UNITDIR_FULL}/${unit}")
  message(STATUS "Installing: ${dest}")
  file(WRITE "${dest}" "${text}")
  file(CHMOD "${dest}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${dest}")
endforeach()
